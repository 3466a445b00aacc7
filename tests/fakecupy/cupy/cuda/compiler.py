"""cupy.cuda.compiler of the double: the error a kernel that does not compile raises."""


class CompileException(Exception):
    """The compiler's log, with the source it rejected."""

    def __init__(self, msg, source, name, options):
        super().__init__(msg)
        self._msg, self.source, self.name, self.options = msg, source, name, options

    def get_message(self):
        return f"{self._msg}\n{self.source}"
