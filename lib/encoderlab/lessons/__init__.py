"""The lessons' own code: one module per lesson for what only that lesson uses.

Each module imports the model (the package's top floor) and the course's tools, never another
lesson's module; what two lessons share moves down into the model or ``encoderlab.data``.
"""
