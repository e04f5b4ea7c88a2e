"""Every `rly` command turns unreadable input into a diagnostic, never a traceback."""
from __future__ import annotations

import pytest

from relay_ir.cli import main

COMMANDS = ["fmt", "check", "run", "opt"]


@pytest.mark.parametrize("command", COMMANDS)
def test_non_utf8_file(command: str, tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "bad.rly"
    path.write_bytes(b'#[version = "0.0.5"]\ndef @main() {\n  1 /* caf\xe9 */\n}\n')
    assert main([command, str(path)]) == 1
    err = capsys.readouterr().err
    assert f"{path}:3:11: parse error: the file is not UTF-8 text (byte 0xe9" in err
    assert "Traceback" not in err
    caret_line = err.splitlines()[2]
    assert caret_line.endswith("^")


@pytest.mark.parametrize("command", COMMANDS)
def test_missing_file_and_directory(command: str, tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    assert main([command, str(tmp_path / "nope.rly")]) == 1
    assert "No such file or directory" in capsys.readouterr().err
    assert main([command, str(tmp_path)]) == 1
    assert "Is a directory" in capsys.readouterr().err


@pytest.mark.parametrize("command", COMMANDS)
def test_empty_file(command: str, tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "empty.rly"
    path.write_text("")
    assert main([command, str(path)]) == 1
    assert "missing version header" in capsys.readouterr().err
