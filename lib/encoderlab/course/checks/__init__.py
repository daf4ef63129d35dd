"""Exercise checkers: each runs the learner's function and says in words what is wrong.

A lesson's check cell passes the learner's function itself, not its result::

    from encoderlab.course import checks
    assert checks.check_attention(my_attention)

Each checker calls the function on chosen and random cases (fixed seed) and compares its answers
with the library's reference. When they differ, it tries the usual wrong versions (a missing
scale, a softmax over the wrong axis, an inverted mask, ...) and reports the one that reproduces
the learner's answers as a :class:`CheckFailed`; when none fits, it says where and by how much
the answers differ. On success it prints one line and returns True.

A failure first says only what is wrong, so that the learner can still work out the fix, and ends
with a line saying how to see it: the same check with ``hint=True`` adds the one-line fix::

    checks.check_attention(my_attention, hint=True)

The loop is written once, in :mod:`.harness`; each lesson's checkers (its cases, reference and
named mistakes) are in their own module, ``l01`` ... ``l10``, re-exported here in lesson order.
"""

from encoderlab.course.checks.harness import CheckFailed
from encoderlab.course.checks.l01 import (
    check_batch_objective,
    check_objective_labels,
    check_prefix_fixed,
)
from encoderlab.course.checks.l02 import (
    check_build_inputs,
    check_wordpiece,
    check_wordpiece_merges,
)
from encoderlab.course.checks.l03 import (
    check_attention,
    check_causal_mask,
    check_multi_head_attention,
    check_padding_mask,
)
from encoderlab.course.checks.l04 import (
    check_encoder_block,
    check_layer_norm,
    check_parameter_count,
)
from encoderlab.course.checks.l04_contributions import check_value_contributions
from encoderlab.course.checks.l05 import check_fill_mask, check_masked_loss, check_mlm_corrupt
from encoderlab.course.checks.l06 import (
    check_rtd_labels,
    check_span_positions,
    check_whole_word_positions,
)
from encoderlab.course.checks.l07 import (
    check_best_span,
    check_bio_to_spans,
    check_entity_f1,
    check_window_span,
)
from encoderlab.course.checks.l08 import (
    check_in_batch_negatives_loss,
    check_mean_pooling,
    check_recall_at_k,
    check_rerank_top_k,
)
from encoderlab.course.checks.l09 import check_online_softmax, check_tiled_backward
from encoderlab.course.checks.l10 import check_cached_greedy, check_prefix_lm_mask

__all__ = [
    "CheckFailed",
    # Lesson 1
    "check_objective_labels",
    "check_batch_objective",
    "check_prefix_fixed",
    # Lesson 2
    "check_wordpiece",
    "check_wordpiece_merges",
    "check_build_inputs",
    # Lesson 3
    "check_attention",
    "check_causal_mask",
    "check_padding_mask",
    "check_multi_head_attention",
    # Lesson 4
    "check_layer_norm",
    "check_parameter_count",
    "check_encoder_block",
    "check_value_contributions",
    # Lesson 5
    "check_mlm_corrupt",
    "check_masked_loss",
    "check_fill_mask",
    # Lesson 6
    "check_whole_word_positions",
    "check_rtd_labels",
    "check_span_positions",
    # Lesson 7
    "check_bio_to_spans",
    "check_entity_f1",
    "check_best_span",
    "check_window_span",
    # Lesson 8
    "check_mean_pooling",
    "check_recall_at_k",
    "check_in_batch_negatives_loss",
    "check_rerank_top_k",
    # Lesson 9
    "check_online_softmax",
    "check_tiled_backward",
    # Lesson 10
    "check_prefix_lm_mask",
    "check_cached_greedy",
]
