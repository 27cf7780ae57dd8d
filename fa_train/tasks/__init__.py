"""LightningModules: language modeling, masked LM, classification, two-tower retrieval and
masked-token self-pretraining."""
from fa_train.tasks.base import TaskModule
from fa_train.tasks.classification import ClassificationTask, RetrievalTask
from fa_train.tasks.lm import LanguageModelingTask
from fa_train.tasks.masked_tokens import MaskedTokenTask
from fa_train.tasks.mlm import MaskedLMTask

__all__ = ["ClassificationTask", "LanguageModelingTask", "MaskedLMTask", "MaskedTokenTask",
           "RetrievalTask", "TaskModule"]
