"""The installed `egbe` command answers a user's mistake with a short message and exit status 2.

Each case runs the real console script in a subprocess, as a user would, and asserts the whole of
stderr: the file or variable, the key and the fix, and never a traceback.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.conftest import ROOT

EGBE = ROOT / ".venv" / "bin" / "egbe"


def egbe(cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """Run `egbe` with only the given EGBE_* variables set (none inherited from the test's environment)."""
    clean = {key: value for key, value in os.environ.items() if not key.startswith("EGBE_")}
    return subprocess.run(
        [str(EGBE), *args],
        cwd=cwd,
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def assert_user_error(done: subprocess.CompletedProcess[str], *lines: str) -> None:
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.splitlines() == [f"egbe: {line}" for line in lines]


def config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "egbe.toml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("toml", "answer"),
    [
        pytest.param(
            "[gateway.budget]\nworld_cap_tokens_per_hr = 60000\n",
            "unknown key gateway.budget.world_cap_tokens_per_hr; did you mean world_cap_tokens_per_hour?",
            id="misspelt-in-its-table-the-nearest-sibling",
        ),
        pytest.param(
            "world_cap_tokens_per_hr = 60000\n",
            "unknown key world_cap_tokens_per_hr; did you mean gateway.budget.world_cap_tokens_per_hour?",
            id="in-the-wrong-table-its-full-path",
        ),
        pytest.param(
            "warp_factor = 9\n",
            "unknown key warp_factor; remove it (docs/configuration.md lists every key)",
            id="no-near-match-the-reference",
        ),
    ],
)
def test_an_unknown_key_in_the_config_file_is_named_with_its_fix(
    tmp_path: Path, toml: str, answer: str
) -> None:
    path = config(tmp_path, toml)
    assert_user_error(egbe(tmp_path, "--config", str(path), "health"), f"config file {path}: {answer}")


def test_a_negative_cap_names_the_key_the_value_and_the_bound(tmp_path: Path) -> None:
    path = config(tmp_path, "[gateway.budget]\nworld_cap_tokens_per_hour = -5\n")
    assert_user_error(
        egbe(tmp_path, "--config", str(path), "ops", "list"),
        f"config file {path}: gateway.budget.world_cap_tokens_per_hour = -5: it should be greater than 0",
    )


def test_bad_toml_names_the_file_and_the_line(tmp_path: Path) -> None:
    path = config(tmp_path, 'log_level = "debug"\nmode = \n')
    assert_user_error(
        egbe(tmp_path, "--config", str(path), "health"),
        f"config file {path} is not valid TOML: Invalid value (at line 2, column 8); fix that line",
    )


def test_a_missing_config_file_says_which_option_named_it(tmp_path: Path) -> None:
    absent = tmp_path / "absent.toml"
    assert_user_error(
        egbe(tmp_path, "--config", str(absent), "health"),
        f"config file {absent} (--config) does not exist; name an existing TOML file",
    )
    assert_user_error(
        egbe(tmp_path, "health", EGBE_CONFIG_FILE=str(absent)),
        f"config file {absent} (EGBE_CONFIG_FILE) does not exist; name an existing TOML file",
    )


def test_an_environment_variable_with_a_bad_value_is_named(tmp_path: Path) -> None:
    assert_user_error(
        egbe(tmp_path, "health", EGBE_MODE="prod"),
        "environment variable EGBE_MODE: mode = 'prod': it should be 'embedded' or 'production'",
    )
    assert_user_error(
        egbe(tmp_path, "health", EGBE_GATEWAY__BUDGET__WORLD_CAP_TOKENS_PER_HOUR="-5"),
        "environment variable EGBE_GATEWAY__BUDGET__WORLD_CAP_TOKENS_PER_HOUR: "
        "gateway.budget.world_cap_tokens_per_hour = '-5': it should be greater than 0",
    )


def test_a_misspelt_environment_variable_is_answered_with_the_right_name(tmp_path: Path) -> None:
    assert_user_error(
        egbe(tmp_path, "health", EGBE_GATEWAY__BUDGET__WORLD_CAP_TOKENS_PER_HR="60000"),
        "environment variable EGBE_GATEWAY__BUDGET__WORLD_CAP_TOKENS_PER_HR: unknown key "
        "gateway.budget.world_cap_tokens_per_hr; "
        "did you mean EGBE_GATEWAY__BUDGET__WORLD_CAP_TOKENS_PER_HOUR?",
    )


def test_an_environment_variable_that_is_not_json_where_json_is_needed(tmp_path: Path) -> None:
    assert_user_error(
        egbe(tmp_path, "health", EGBE_ENDPOINTS="kernel:7000"),
        "environment variable EGBE_ENDPOINTS is not valid JSON; set it to a JSON value, or set one key "
        "with EGBE_ENDPOINTS__<KEY>",
    )


def test_a_too_short_token_names_the_file_and_the_role(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.json"
    tokens.write_text(json.dumps({"operator": "short"}))
    assert_user_error(
        egbe(tmp_path, "ops", "list", EGBE_TOKENS_FILE=str(tokens)),
        f"EGBE_TOKENS_FILE: tokens file {tokens}: the operator token is shorter than 16 characters; "
        "use 16 or more random ones",
    )


@pytest.mark.parametrize("command", [("ops", "list"), ("up", "--ephemeral-ports")])
def test_a_missing_tokens_file_is_named_for_clients_and_servers(
    tmp_path: Path, command: tuple[str, ...]
) -> None:
    absent = tmp_path / "absent-tokens.json"
    assert_user_error(
        egbe(tmp_path, "--data-dir", str(tmp_path / "data"), *command, EGBE_TOKENS_FILE=str(absent)),
        f"EGBE_TOKENS_FILE: tokens file {absent} does not exist; point EGBE_TOKENS_FILE at the "
        "{role: token} JSON file the services use",
    )


@pytest.mark.parametrize(
    "command",
    [("ops", "list"), ("ops", "spend", "--world", "w"), ("audit", "export"), ("ops", "attempts")],
)
def test_a_client_command_never_creates_tokens(tmp_path: Path, command: tuple[str, ...]) -> None:
    data_dir = tmp_path / "never-started"
    assert_user_error(
        egbe(tmp_path, "--data-dir", str(data_dir), *command),
        f"no tokens at {data_dir}/tokens.json: start the services with this data dir "
        f"(egbe --data-dir {data_dir} up), or set EGBE_TOKENS_FILE to the tokens file they use",
    )
    assert not data_dir.exists()


def test_output_cut_short_by_its_reader_ends_quietly(tmp_path: Path) -> None:
    """`egbe budget worst-case | head -0`: the reader has gone before the first line is written."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        done = subprocess.run(
            [str(EGBE), "budget", "worst-case"],
            cwd=tmp_path,
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        os.close(write_end)
    assert (done.returncode, done.stderr) == (1, "")
