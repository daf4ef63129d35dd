"""The course's machinery: exercise checks, figures, benchmarks, training artefacts, the student
notebooks and grading. It uses the model and the lessons' modules; the model never imports it.
"""
