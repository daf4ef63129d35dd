"""The instructor's grader for the course "Encoder Mechanics": student notebooks, grading in a
fenced kernel, the Gradescope bundle. ``python -m encoderlab_grader --help`` lists the tools.

It imports the course library (``encoderlab``: its checkers and the kernel's half of a recorded
check); the course library never imports it, and a learner's install does not contain it.
"""
