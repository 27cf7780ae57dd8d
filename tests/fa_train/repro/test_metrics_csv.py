"""A finished run's metrics.csv kept compressed: the readers see the same rows, the bytes repeat."""
from fa_train.repro.metrics_csv import compress, read_loss_csv, read_rows, stored

TEXT = "step,train/loss,val/acc\n1,2.0,\n2,1.5,0.6\n"


def test_compressed_rows_read_as_the_plain_ones(tmp_path):
    plain = tmp_path / "a" / "metrics.csv"
    plain.parent.mkdir()
    plain.write_text(TEXT)
    rows = read_rows(plain)
    assert compress(plain) == plain.with_name("metrics.csv.gz") == stored(plain)
    assert not plain.exists() and read_rows(plain) == rows
    assert read_loss_csv(plain, ["val/acc"]) == ([2.0], [0.6])
    again = tmp_path / "b" / "metrics.csv"
    again.parent.mkdir()
    again.write_text(TEXT)
    assert compress(again).read_bytes() == stored(plain).read_bytes()   # no timestamp inside
    assert compress(tmp_path / "none" / "metrics.csv") is None and read_rows(tmp_path / "x.csv") == []
