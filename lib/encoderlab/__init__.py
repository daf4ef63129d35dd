"""encoderlab: the course library of Encoder Mechanics.

The package has three floors. Read the model first, in this order; each module is one idea of
the course:

    masks          who may attend to whom: boolean, True = may attend (Lessons 1, 3)
    attention      scaled dot-product attention and the multi-head layer (Lesson 3)
    pretokenizer   BERT's text clean-up and split into words (Lesson 2)
    tokenizer      WordPiece and the encoder's input: [CLS] A [SEP] B [SEP] (Lesson 2)
    embeddings     token + position + segment embeddings, H^(0) (Lesson 2)
    encoder        the encoder block and stack, post-LN as in BERT (Lesson 4)
    pretrained     the real all-MiniLM-L6-v2, loaded through one name map (Lessons 1-4)
    objectives     the training objectives and their losses, one IGNORE_INDEX (Lessons 1, 5, 6)
    heads          what sits on the stack: MLM, classifiers, spans, pooling (Lessons 5-8)
    rotary         rotary position embeddings (Lesson 9)
    tiled          attention over tiles with the online softmax (Lesson 9)
    decoder        the decoder block with cross-attention; encoder-decoder models (Lesson 10)
    training       the training loop the lessons share, and the committed artefacts (Lessons 3-10)
    stats          the sign test and the intervals of paired comparisons (Lessons 5-8)
    validate       the input checks every module shares

Below the model: ``kernels/`` (the Triton GPU kernel), ``data/`` (synthetic tasks and the frozen
corpora), ``lessons/`` (what only one lesson uses, in modules named after it) and ``course/`` (the
exercise checks, the figures, benchmarks, the command that retrains artefacts). Imports go down
only: the model imports neither of the last two, and a lesson nothing from ``course/``. One
command runs the course's tools: ``python -m encoderlab --help``.

The model's main names are importable from here: ``from encoderlab import EncoderModel``.
"""

from encoderlab import masks
from encoderlab.attention import KVCache, MultiHeadAttention, scaled_dot_product_attention
from encoderlab.decoder import EncoderDecoderConfig, EncoderDecoderModel
from encoderlab.embeddings import Embeddings
from encoderlab.encoder import (
    EncoderBlock,
    EncoderConfig,
    EncoderModel,
    EncoderOutput,
    FeedForward,
    count_parameters,
)
from encoderlab.heads import LanguageModelHead, TinyLM, pool
from encoderlab.objectives import mlm_corrupt, mlm_loss, next_token_loss
from encoderlab.pretrained import find_weights, load_minilm
from encoderlab.rotary import apply_rotary
from encoderlab.tiled import tiled_attention
from encoderlab.tokenizer import WordPieceTokenizer

__version__ = "0.1.0"

# in the reading order above
__all__ = [
    "masks",
    "scaled_dot_product_attention", "MultiHeadAttention", "KVCache",
    "WordPieceTokenizer",
    "Embeddings",
    "EncoderConfig", "FeedForward", "EncoderBlock", "EncoderModel", "EncoderOutput",
    "count_parameters",
    "find_weights", "load_minilm",
    "mlm_corrupt", "mlm_loss", "next_token_loss",
    "LanguageModelHead", "TinyLM", "pool",
    "apply_rotary",
    "tiled_attention",
    "EncoderDecoderConfig", "EncoderDecoderModel",
]
