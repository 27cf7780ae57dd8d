"""Run folders: unique per run, even for runs started in the same second."""
import subprocess
import sys

from fa_train.utils.run_dir import MARKER, claim_run_dir, enter_run_dir, run_id


def test_run_id_is_fixed_per_process_and_differs_between_processes():
    assert run_id() == run_id()
    code = "from fa_train.utils.run_dir import run_id; print(run_id())"
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
             for _ in range(2)]
    ids = [p.communicate(timeout=60)[0].strip() for p in procs]
    assert all(ids) and ids[0] != ids[1]


def test_a_claimed_folder_is_never_shared(tmp_path):
    first = claim_run_dir(tmp_path / "exp" / "same-second")
    second = claim_run_dir(tmp_path / "exp" / "same-second")
    third = claim_run_dir(tmp_path / "exp" / "same-second")
    assert first.name == "same-second"
    assert second.name == "same-second_1" and third.name == "same-second_2"
    assert all((d / MARKER).is_file() for d in (first, second, third))


def test_a_folder_hydra_created_is_claimed_once(tmp_path):
    (tmp_path / "run" / ".hydra").mkdir(parents=True)  # Hydra makes the folder before train()
    assert claim_run_dir(tmp_path / "run") == tmp_path / "run"
    assert claim_run_dir(tmp_path / "run") == tmp_path / "run_1"


def test_a_resumed_run_reenters_its_folder(tmp_path):
    first = claim_run_dir(tmp_path / "run")
    assert enter_run_dir(first) == first
