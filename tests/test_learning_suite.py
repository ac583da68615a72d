"""The learning suite's games run as a user would run them: every game trains a step on the tiny model and is
evaluated beside its scripted baselines, through `benchmarks/learning_suite/run.py`'s own `run_game`."""

import sys

import pytest
from benchmark_scripts import BENCHMARKS

SUITE = BENCHMARKS / "learning_suite"


@pytest.fixture(scope="module")
def suite():
    sys.path.insert(0, str(SUITE))
    import run

    yield run
    sys.path.remove(str(SUITE))


def test_every_game_of_the_suite_trains_and_is_scored_beside_its_baselines(suite, tiny_model_dir, tmp_path):
    # A small step and 3 held-out games: this checks that the games run and are scored, not that they learn.
    changes = {"batch_size": 2, "group_size": 2, "allow_nothing_trained": True}
    rows = []
    for name in suite.GAMES:
        rows.append(suite.run_game(name, 0, 1, 3, tmp_path, changes, str(tiny_model_dir)))
        game = sys.modules[name]
        assert set(rows[-1]["columns"]) == {"untrained", "trained", *game.BASELINES}, name
        assert rows[-1]["steps"] == 1 and rows[-1]["metric"] == game.METRIC, name
    table = suite.table(rows)
    assert all(f"| {name} | 0 |" in table for name in suite.GAMES), table
