"""Step 55: the output size of a convolution.

A KxK filter slides over an HxW input with stride S after padding P pixels
on each side; it fits (H + 2P - K) // S + 1 times along the height (and the
same along the width). `dezero.utils.get_conv_outsize` computes it; the
layers of the next steps rely on it.
Run: python steps/step55.py
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dezero.utils import get_conv_outsize

H, W = 4, 4  # input
KH, KW = 3, 3  # kernel
SH, SW = 1, 1  # stride
PH, PW = 1, 1  # padding
OH = get_conv_outsize(H, KH, SH, PH)
OW = get_conv_outsize(W, KW, SW, PW)
print(f"input {H}x{W}, kernel {KH}x{KW}, stride {SH}, pad {PH} -> output {OH}x{OW}")

for h, k, s, p in ((7, 3, 1, 0), (7, 3, 2, 0), (7, 3, 2, 1), (224, 3, 1, 1), (224, 2, 2, 0)):
    print(f"H={h:3d} K={k} S={s} P={p} -> {get_conv_outsize(h, k, s, p)}")
