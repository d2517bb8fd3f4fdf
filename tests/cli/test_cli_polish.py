"""What the ocrr command prints: complete listings, short by default, hints on stderr for
combinations known to be meaningless, and messages that are never hard-wrapped."""

from __future__ import annotations

import argparse
import re

import pytest
from tests import conftest

from ocrr.cli.main import COMMANDS, build_parser, main
from ocrr.protocols import PROTOCOLS, Option, Protocol
from ocrr.protocols.base import COMMON_OPTIONS
from ocrr.systems import REGISTRY

# a tiny synthetic dataset: each run takes a fraction of a second
TINY = [
    "--dataset",
    "synthetic",
    *("--data-option", "n_classes=14", "--data-option", "dim=16"),
    *("--data-option", "n_train_per_class=10", "--data-option", "n_test_per_class=4"),
    *("--systems", "static_knn", "--quiet"),
]


def run_cli(*args) -> int:
    return main([str(a) for a in args])


def hints_of(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("hint: ")]


# -- ocrr protocols ------------------------------------------------------------------------------


def test_protocols_lists_every_protocol_with_every_option_including_shift(capsys):
    assert run_cli("protocols") == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == (
        f"{len(PROTOCOLS)} protocols. Set options as --protocol name:key=value, e.g. --protocol heldout:every=25; "
        "'ocrr protocols NAME' explains each option."
    )
    blocks = "\n".join(lines[1:]).strip().split("\n\n")
    assert [block.split()[0] for block in blocks] == list(PROTOCOLS)  # every registered one, in order
    pad = " " * (max(map(len, PROTOCOLS)) + 2)  # names are padded to the longest one
    assert blocks[0].splitlines() == [
        "heldout".ljust(len(pad)) + "held-out classes (OCRR paper 3.2): recover novel classes, keep the original ones",
        pad + "metrics: acc_novel, acc_original",
        pad + "options: n_heldout=10, eval_cap=400, every=50, shift=none",
    ]
    assert blocks[list(PROTOCOLS).index("ocl")].splitlines()[2] == (
        pad + "options: batch=1, stay=0.0, upstream=0.0, split=test, checkpoints=20, windows=10, shift=none"
    )
    for block in blocks:  # the common options are every protocol's
        assert all(f"{key}=" in block.splitlines()[2] for key in COMMON_OPTIONS)


def test_a_newly_registered_protocol_is_listed_with_its_options(capsys, monkeypatch):
    class Toy(Protocol):
        name = "toy"
        summary_text = "a toy protocol"
        options = {"size": Option(3, int, low=1, help="items")}
        metrics = ("acc_toy",)

    monkeypatch.setitem(PROTOCOLS, "toy", Toy)
    assert run_cli("protocols") == 0
    out = capsys.readouterr().out
    pad = " " * (max(map(len, PROTOCOLS)) + 2)
    assert f"{'toy'.ljust(len(pad))}a toy protocol\n{pad}metrics: acc_toy\n{pad}options: size=3, shift=none\n" in out
    assert run_cli("protocols", "toy") == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "toy: a toy protocol. Metrics: acc_toy."
    assert [line.split()[0] for line in lines[2:-1]] == ["size", "shift"]


def test_protocols_name_lists_its_options_and_shift(capsys):
    assert run_cli("protocols", "ocl") == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].split() == ["option", "type", "allowed", "default", "help"]
    assert [line.split()[0] for line in lines[2:-1]] == [
        "batch",
        "stay",
        "upstream",
        "split",
        "checkpoints",
        "windows",
        "shift",
    ]


# -- ocrr systems --------------------------------------------------------------------------------


def listed_rows(out: str) -> list[str]:
    """The systems listed (a family's heading row has no description)."""
    cells = [line.split("│") for line in out.splitlines() if line.startswith("│")]
    return [cell[1].strip() for cell in cells if cell[2].strip()]


@pytest.fixture
def piped(monkeypatch):
    """Output to a pipe, no COLUMNS: the console's 120 columns."""
    monkeypatch.delenv("COLUMNS", raising=False)


def test_systems_is_one_line_per_system_and_fits_a_screen(capsys, piped):
    assert run_cli("systems") == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    rows = listed_rows(out)
    aliases = {f"{base}_{n}" for base in ("bounded_reservoir", "bounded_fifo") for n in (100, 500, 1000, 5000)}
    assert aliases | set(rows) == set(REGISTRY) and not aliases & set(rows)
    assert len(rows) == len(set(rows))  # each system once, on one line
    families = list(dict.fromkeys(REGISTRY[name].family for name in rows))
    # table borders and header, a heading per family (one folds onto 2 lines) and a rule between
    # families, 2 alias lines, 1 footer
    assert len(lines) == len(rows) + 4 + len(families) + 1 + len(families) - 1 + 3
    assert len(lines) <= 90 and max(len(line) for line in lines) <= 120  # piped output: 120 columns
    assert lines[3:5] == [
        "│ retrieval:           │" + " " * 95 + "│",
        "│ substrate            │ hash-chained append-only ledger, k=5 cosine neighbours, margin-band (0.05) "
        "majority vote      │",
    ]
    assert "Aliases: bounded_fifo_100, _500, _1000, _5000 (= bounded_fifo:budget=N)" in lines
    assert "│ consolidating_head   │ consolidating answering with the head alone" in out
    assert lines[-1] == (
        "One system's options: ocrr systems NAME. Hyperparameters: ocrr systems FAMILY, or ocrr systems --all."
    )
    assert "margin=0.05" not in out  # no hyperparameters in the short list


def test_systems_short_list_cuts_long_descriptions_to_the_line(capsys, piped):
    assert run_cli("systems") == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("│ bounded_reservoir "))
    assert row.endswith("… │") and len(row) == 120


def test_systems_all_and_a_family_give_the_hyperparameters(capsys):
    assert run_cli("systems", "--all") == 0
    everything = capsys.readouterr().out
    assert "margin=0.05" in everything and "budget=1000" in everything and "rest as substrate" in everything
    assert "bounded_reservoir_100," in everything and "bounded_reservoir:budget=N)" in everything
    for family in ("cmr refinement", "cmr-refinement", "cmr_refinement"):
        assert run_cli("systems", family) == 0
        rows = listed_rows(capsys.readouterr().out)
        names = [r for r in rows if r]  # the first cell of a wrapped row's later lines is empty
        assert set(names) == {n for n, e in REGISTRY.items() if e.family == "cmr refinement"}
    assert run_cli("systems", "-v") == 0
    assert capsys.readouterr().out == everything


def test_systems_name_still_lists_one_systems_options(capsys):
    assert run_cli("systems", "substrate") == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("substrate (retrieval): ")
    assert lines[-1] == "Override as substrate:key=value, e.g. --systems substrate:k=5"
    assert run_cli("systems", "retrievl") == 2
    assert "unknown system 'retrievl'" in capsys.readouterr().err


# -- hints ---------------------------------------------------------------------------------------


def test_a_plain_run_prints_no_hint(tmp_path, capsys):
    assert run_cli("run", *TINY, "--seeds", "0", "--out", tmp_path / "r") == 0
    assert hints_of(capsys.readouterr().err) == []


def test_ocl_without_policy_all_or_a_shift_is_hinted(tmp_path, capsys):
    assert run_cli("run", *TINY, "--seeds", "0", "--protocol", "ocl:stay=0.9", "--out", tmp_path / "r") == 0
    assert hints_of(capsys.readouterr().err) == [
        "hint: the ocl protocol under --policy oracle learns only from corrected mistakes; EvalOCL's "
        "comparison (online vs near-future accuracy, retention) reveals every label: --policy all.",
        "hint: --protocol ocl:stay=0.9 measures no near-future accuracy, only online accuracy (which a "
        "label-ordered stream inflates); find S with 'ocrr calibrate-shift --protocol ocl:stay=0.9', then "
        "give --protocol ocl:stay=0.9:shift=S.",
    ]
    spec = "ocl:stay=0.9:shift=4"
    assert run_cli("run", *TINY, "--seeds", "0", "--protocol", spec, "--policy", "all", "--out", tmp_path / "a") == 0
    assert hints_of(capsys.readouterr().err) == []
    # a shuffled stream (stay=0) has nothing for a shift to remove: no shift hint
    assert run_cli("run", *TINY, "--seeds", "0", "--protocol", "ocl", "--policy", "all", "--out", tmp_path / "b") == 0
    assert hints_of(capsys.readouterr().err) == []


def test_options_that_change_nothing_are_hinted(tmp_path, capsys):
    argv = ["--seeds", "0", "0", "--policy", "random:1", "--protocol", "heldout:every=20", "--every", "10"]
    assert run_cli("run", *TINY, *argv, "--no-oos", "--fallback-demo", "--out", tmp_path / "r") == 0
    assert hints_of(capsys.readouterr().err) == [
        "hint: --policy random:1 corrects every wrong prediction, as oracle does; give oracle (the same runs, "
        "with results that sit beside oracle's).",
        "hint: --every 10 is ignored: --protocol heldout:every=20 sets every=20. Give it once.",
        "hint: --seeds lists 0 more than once; each seed runs once.",
        "hint: --no-oos only changes clinc150 (it drops its out-of-scope class); synthetic is unaffected.",
        "hint: --fallback-demo changes nothing with --dataset synthetic: it is always available.",
    ]


def test_sweep_hints_name_its_own_flags(tmp_path, capsys):
    argv = ["sweep", "--preset", "smoke", "--dry-run", "--out", tmp_path / "s"]
    assert run_cli(*argv, "--protocol", "ocl", "--policies", "oracle", "random50", "--address", "auto") == 0
    assert hints_of(capsys.readouterr().err) == [
        "hint: the ocl protocol under --policies oracle random50 learns only from corrected mistakes; EvalOCL's "
        "comparison (online vs near-future accuracy, retention) reveals every label: add all to --policies.",
        "hint: --address is where a Ray cluster listens; --executor local ignores it. Add --executor ray.",
    ]
    assert run_cli(*argv, "--executor", "serial", "--jobs", "2", "--report") == 0
    assert hints_of(capsys.readouterr().err) == [
        "hint: --jobs is ignored by --executor serial (one run at a time, in this process); use local for workers.",
        "hint: --report writes nothing with --dry-run (nothing runs); drop --dry-run to run and report.",
    ]
    assert run_cli(*argv, "--protocol", "cmr:streams=4", "--seeds", "0", "1") == 0
    assert hints_of(capsys.readouterr().err) == [
        "hint: --protocol cmr:streams=4 cycles over 4 streams (stream = seed mod 4), but the seeds reach 2 of "
        "them; give --seeds 0 to 11 for 4 streams x 3 seeds."
    ]
    assert run_cli(*argv) == 0
    assert hints_of(capsys.readouterr().err) == []


def test_an_option_the_cmr_preset_would_ignore_is_an_error(capsys):
    assert run_cli("sweep", "--preset", "cmr", "--dry-run", "--seeds", "0", "1", "--policies", "all") == 2
    err = capsys.readouterr().err
    assert err == (
        "error: --preset cmr sets its policy (oracle), encoder (minilm) and seeds (validation, then test streams) "
        "itself and takes its other settings from the command line only, so --policies, --seeds would be ignored. "
        "Drop them, or run your own grid without the preset, e.g. ocrr sweep --datasets clinc150 --protocol cmr "
        "--seeds 0 1 2 --systems cft er substrate.\n"
    )
    assert run_cli("sweep", "--preset", "cmr", "--dry-run") == 0  # the preset as it is still runs


# -- never hard-wrapped --------------------------------------------------------------------------


@pytest.fixture
def long_folder(tmp_path, monkeypatch):
    """A narrow terminal and a folder whose path is far longer than any console line."""
    monkeypatch.setenv("COLUMNS", "40")
    return tmp_path / ("a-folder-whose-name-must-stay-whole-" * 5) / "out"


def test_notices_and_hints_stay_whole_on_a_narrow_screen(long_folder, capsys):
    assert run_cli("run", *TINY, "--seeds", "0", "--protocol", "ocl:stay=0.5", "--out", long_folder) == 0
    captured = capsys.readouterr()
    wrote = [line for line in captured.out.splitlines() if " wrote " in line]
    assert len(wrote) == 1 and wrote[0].endswith(f" to {long_folder}/")  # path and all on one line
    hints = hints_of(captured.err)
    assert len(hints) == 2 and all(len(h) > 120 for h in hints)  # each hint whole, however long
    assert captured.err.count("\n") == 2
    assert run_cli("sweep", "--preset", "smoke", "--dry-run", "--out", long_folder) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines == [
        f"8 runs = 1 datasets x 1 encoders x 1 protocols x 2 policies x 2 systems x 2 seeds; 0 already done in "
        f"{long_folder}/, 8 to run."
    ]


def test_an_error_naming_a_long_path_is_one_line_on_a_narrow_screen(long_folder, capsys):
    assert run_cli("run", "--dataset", f"csv:{long_folder / 'mine.csv'}", "--quiet") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and str(long_folder / "mine.csv") in err


# -- the wording users read ----------------------------------------------------------------------


def all_help_texts() -> dict[str, str]:
    """`ocrr <command> -h` of every command and subcommand, by command."""
    texts = {}

    def walk(parser: argparse.ArgumentParser, name: str) -> None:
        texts[name] = parser.format_help()
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for sub, subparser in action.choices.items():
                    walk(subparser, f"{name} {sub}".strip())

    walk(build_parser(), "")
    return texts


def test_help_texts_speak_to_users_in_the_present_tense():
    texts = all_help_texts()
    assert set(COMMANDS) <= set(texts)
    internal = re.compile(r"this machine|\bissue \d|\bstop \d|\b\d+ cores\b|/work/|\.\./shared|shared folder", re.I)
    found = {name: internal.findall(text) for name, text in texts.items() if internal.search(text)}
    assert not found


def test_real_data_tests_skip_naming_the_project_settings_only(monkeypatch, tmp_path):
    assert conftest.NO_REAL_DATA == (
        "needs the real datasets: set OCRR_DATA_DIR to a folder holding Banking77 / CLINC150 "
        "(banking77/ and clinc150/), see docs/getting-started.md"
    )
    monkeypatch.setenv("OCRR_DATA_DIR", str(tmp_path))
    assert conftest._real_data_dir() == str(tmp_path)
    monkeypatch.delenv("OCRR_DATA_DIR")
    monkeypatch.setattr(conftest, "USER_CACHE", tmp_path)  # an empty cache: nothing found
    assert conftest._real_data_dir() is None
    for name, files in conftest.REMOTE_FILES.items():
        for file in files:
            (tmp_path / "data" / name).mkdir(parents=True, exist_ok=True)
            (tmp_path / "data" / name / file).write_text("")
    assert conftest._real_data_dir() == str(tmp_path / "data")  # a download in the user cache


def test_a_test_fraction_beside_a_test_file_is_hinted_before_the_data_is_read(tmp_path, capsys):
    dataset = f"csv:{tmp_path / 'train.csv'},{tmp_path / 'test.csv'}"
    assert run_cli("run", "--dataset", dataset, "--test-fraction", "0.3", "--quiet", "--out", tmp_path / "r") == 2
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == f"hint: --test-fraction 0.3 is ignored: --dataset {dataset} names its test file."
    assert lines[1].startswith("error: ") and len(lines) == 2  # the missing file is still an error


def test_sweep_help_and_its_error_name_every_preset(capsys, monkeypatch):
    from ocrr.cli.sweep import preset_names
    from ocrr.engine.sweep import PRESETS

    monkeypatch.setitem(PRESETS, "newly_added", {"datasets": ["synthetic"]})
    monkeypatch.setenv("COLUMNS", "1000")  # one help line per option
    with pytest.raises(SystemExit):
        main(["sweep", "-h"])
    line = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("  --preset PRESET"))
    listed = [part.strip().split(" (")[0] for part in line.split("PRESET", 1)[1].split(" | ")]
    assert listed == preset_names() and "newly_added" in listed and "cmr_table2" in listed
    assert run_cli("sweep") == 2
    assert f"--preset {'|'.join(preset_names())}, --config FILE" in capsys.readouterr().err


def test_embed_hints_data_options_that_change_nothing(tmp_path, capsys):
    dataset = f"csv:{tmp_path / 'train.csv'},{tmp_path / 'test.csv'}"
    assert run_cli("embed", "--dataset", dataset, "--test-fraction", "0.3", "--no-oos") == 2
    lines = capsys.readouterr().err.splitlines()
    assert lines[:2] == [
        f"hint: --no-oos only changes clinc150 (it drops its out-of-scope class); {dataset} is unaffected.",
        f"hint: --test-fraction 0.3 is ignored: --dataset {dataset} names its test file.",
    ]
    assert lines[2].startswith("error: ") and len(lines) == 3


def test_systems_on_a_terminal_fits_its_width(capsys, monkeypatch):
    monkeypatch.setenv("FORCE_COLOR", "1")  # rich then treats the output as a terminal
    monkeypatch.setenv("COLUMNS", "80")
    assert run_cli("systems") == 0
    lines = [re.sub(r"\x1b\[[0-9;]*m", "", line) for line in capsys.readouterr().out.splitlines()]
    table = [line for line in lines if line[:1] in "┏┃┡│├└"]
    assert len(table) == len(lines) - 3 and {len(line) for line in table} == {80}
    # the name column holds the longest name, the description all the rest: no column of blanks
    assert "│ substrate            │ hash-chained append-only ledger, k=5 cosine neighbou… │" in table
    assert "│ online continual     │" + " " * 55 + "│" in table  # a long family folds in its heading


def test_run_refuses_the_same_column_for_text_and_label(tmp_path, capsys):
    data = tmp_path / "mine.csv"
    data.write_text("text,label\n" + "".join(f"item {i},l{i % 3}\n" for i in range(30)), encoding="utf-8")
    argv = ("--text-col", "label", "--label-col", "label", "--quiet", "--out", tmp_path / "r")
    assert run_cli("run", "--dataset", f"csv:{data}", *argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --text-col and --label-col both name the column 'label'"), err
    assert not (tmp_path / "r").exists()


def test_run_help_says_what_the_command_does_and_the_default_dataset(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")  # one help line per option
    with pytest.raises(SystemExit):
        run_cli("run", "--help")
    out = capsys.readouterr().out
    description = out.split("\n\n")[1]
    assert description.startswith("Run systems through a protocol"), out
    dataset_help = next(line for line in out.splitlines() if line.strip().startswith("--dataset DATASET"))
    assert "(default banking77" in dataset_help
