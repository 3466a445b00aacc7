"""Command line entry point: `python -m dezero COMMAND [options]`.

Commands live in their own modules and are imported only when chosen, so the
command line costs nothing at `import dezero`. Unknown commands print the usage
and exit with status 2.

    python -m dezero demo --out dezero-demo
"""
import argparse
import sys

# =============================================================================
# Commands: COMMANDS, main
# =============================================================================

# name -> (module under dezero, one-line help)
COMMANDS = {
    "demo": ("demo", "train the spiral network eagerly, traced and fused; draw its graphs"),
}


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m dezero",
        description="dezero: define-by-run autograd with a trace mode.")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    modules = {}
    for name, (module_name, help_text) in COMMANDS.items():
        module = __import__(f"dezero.{module_name}", fromlist=["main"])
        module.build_parser(subparsers.add_parser(name, help=help_text))
        modules[name] = module
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_usage(sys.stderr)
        print("python -m dezero: error: choose a COMMAND: " + ", ".join(COMMANDS),
              file=sys.stderr)
        return 2
    return modules[args.command].main(args)


if __name__ == "__main__":
    sys.exit(main())
