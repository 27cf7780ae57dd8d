"""Models: plain nn.Modules (no Lightning). Attention goes through fa_train.attention."""
from fa_train.models.bert import BERT_PRESETS, BertConfig, BertForPreTraining
from fa_train.models.classifier import (ClassifierConfig, LongDocClassifier, LRAClassifier,
                                        SequenceClassifier, load_with_position_interpolation,
                                        resize_position_table, tile_position_table)
from fa_train.models.gpt import GPT, GPT2_PRESETS, GPTConfig

__all__ = [
    "BERT_PRESETS", "BertConfig", "BertForPreTraining", "ClassifierConfig", "GPT", "GPT2_PRESETS",
    "GPTConfig", "LongDocClassifier", "LRAClassifier", "SequenceClassifier",
    "load_with_position_interpolation", "resize_position_table", "tile_position_table",
]
