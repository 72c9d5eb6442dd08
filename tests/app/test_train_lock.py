"""Two `prism train` runs into one models folder (issue 55): the second is refused with one
line naming the running one, as a second `prism sample` into one store is."""
import json
import socket
import subprocess
import sys

from predictor.app.cli import main


def test_a_second_train_into_one_models_folder_is_refused_naming_the_first(tmp_path, capsys):
    root = tmp_path / "models"
    root.mkdir()
    first = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (root / ".writer.lock").write_text(json.dumps({"pid": first.pid, "host": socket.gethostname(),
                                                        "started": "2026-11-28T23:00:00+00:00"}))
        code = main(["train", "samples=samples/local-cpu", "hardware=local-cpu", f"models_dir={root}"])
        err = capsys.readouterr().err.strip()
    finally:
        first.kill()
        first.wait()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert f"pid {first.pid}" in err and "prism train" in err and "models_dir" in err
    assert not (root / "local-cpu").exists()
