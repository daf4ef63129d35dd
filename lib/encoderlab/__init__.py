"""encoderlab: the course library of Encoder Mechanics.

Each module holds one idea of the course; the notebooks import them and the
tests prove them. Start with `encoderlab.masks` and `encoderlab.attention`.
"""

__version__ = "0.1.0"
