"""LightningModules: language modeling, masked LM, classification and two-tower retrieval."""
from fa_train.tasks.base import TaskModule
from fa_train.tasks.classification import ClassificationTask, RetrievalTask
from fa_train.tasks.lm import LanguageModelingTask
from fa_train.tasks.mlm import MaskedLMTask

__all__ = ["ClassificationTask", "LanguageModelingTask", "MaskedLMTask", "RetrievalTask",
           "TaskModule"]
