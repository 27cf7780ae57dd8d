"""Long-document multi-label JSONL loader and DataModule (byte and BPE tokens)."""
import json

import pytest
import torch

from fa_train.data import longdoc


def _write(tmp_path, val_name="validation"):
    rows = {
        "train": [{"text": "Patient admitted with chest pain. " * 20, "labels": ["401.9", "428.0"]},
                  {"text": ["Paragraph one.", "Paragraph two."], "labels": ["414.01"]},
                  {"text": "Nothing coded.", "labels": []}],
        val_name: [{"text": "short", "labels": ["428.0"]}],
        "test": [{"text": "other", "label": ["401.9"]}],
    }
    for split, rs in rows.items():
        (tmp_path / f"{split}.jsonl").write_text("\n".join(json.dumps(r) for r in rs) + "\n")
    return tmp_path


def test_byte_tokens_and_multi_hot(tmp_path):
    dm = longdoc.LongDocDataModule(data_dir=str(_write(tmp_path)), max_length=128, batch_size=3)
    dm.setup()
    assert dm.label_names == ["401.9", "414.01", "428.0"] and dm.multi_label
    assert (dm.vocab_size, dm.seq_len, dm.num_classes) == (257, 128, 3)
    batch = next(iter(dm.val_dataloader()))
    assert batch["input_ids"].dtype == torch.int64 and batch["attention_mask"].dtype == torch.bool
    assert batch["labels"].dtype == torch.float32 and batch["labels"].tolist() == [[0.0, 0.0, 1.0]]
    train = torch.utils.data.DataLoader(dm.datasets["train"], batch_size=3, collate_fn=dm.collator())
    tb = next(iter(train))
    assert tb["input_ids"].shape == (3, 128) and tb["attention_mask"][0].all()  # truncated at 128
    assert tb["labels"].tolist() == [[1, 0, 1], [0, 1, 0], [0, 0, 0]]
    assert tb["attention_mask"][1].sum() == len("Paragraph one.\nParagraph two.")


def test_bpe_tokenizer_file(tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(["patient admitted with chest pain"] * 5,
                            trainers.BpeTrainer(vocab_size=60, special_tokens=["<pad>", "<unk>"]))
    path = tmp_path / "tok.json"
    tok.save(str(path))
    (tmp_path / "d").mkdir()
    data = _write(tmp_path / "d", val_name="dev")
    dm = longdoc.LongDocDataModule(data_dir=str(data), max_length=16384, tokenizer=str(path),
                                   batch_size=2, label_names=["428.0", "401.9"])
    dm.setup()
    assert dm.vocab_size == tok.get_vocab_size() and dm.num_classes == 2 and dm.pad_id == 0
    b = next(iter(dm.test_dataloader()))
    assert b["input_ids"].shape == (1, 16384) and b["labels"].tolist() == [[0.0, 1.0]]


def test_errors_name_the_layout(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"train,validation,test\}\.jsonl"):
        longdoc.LongDocDataModule(data_dir=str(tmp_path)).setup()
    with pytest.raises(ValueError, match="max_length 20000"):
        longdoc.LongDocDataModule(data_dir=str(tmp_path), max_length=20000)
    for s in ("train", "validation", "test"):
        (tmp_path / f"{s}.jsonl").write_text('{"labels": []}\n')
    with pytest.raises(ValueError, match="no 'text' field"):
        longdoc.LongDocDataModule(data_dir=str(tmp_path)).setup()
