"""The lessons' own code: what only one lesson uses, in modules named after it (``l05_mlm``).

A lesson with a long experiment has two or three modules (``l07_tasks``, ``l07_finetune``,
``l07_recipes``); they may import each other. A lesson's module never imports another lesson's:
what two lessons share moves down into the model (``objectives``, ``heads``) or ``encoderlab.data``.
They use the course's training loop and sign test (``course.train``, ``course.stats``).
"""
