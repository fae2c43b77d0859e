"""Shipped recipes: every recipe is a valid set of `keras-dml train` flags, flags
given on the command line override it, and unknown names are refused clearly."""

import pytest

from keras_dml import cli
from keras_dml.training import recipes
from keras_dml.cli.parser import _with_recipe


def _parsed(argv):
    parser = cli.build_parser()
    args = parser.parse_args(argv)
    return _with_recipe(parser, argv, args) if args.recipe or args.list_recipes else args


@pytest.mark.parametrize("name", sorted(recipes.RECIPES))
def test_every_recipe_sets_valid_train_flags(name):
    args = _parsed(["train", "--recipe", name])
    for key, value in recipes.get(name).items():
        assert getattr(args, key) == value, key


def test_flags_on_the_command_line_override_the_recipe():
    args = _parsed(["train", "--recipe", "omniglot-best", "--learning-rate", "5e-4",
                    "--loss", "MultiSimilarity"])
    assert args.learning_rate == 5e-4 and args.loss == "MultiSimilarity"
    assert args.backbone == recipes.get("omniglot-best")["backbone"]


def test_the_best_recipes_memory_can_be_turned_off():
    args = _parsed(["train", "--recipe", "omniglot-best", "--memory-size", "0",
                    "--no-memory-batch-loss"])
    assert args.memory_size == 0 and args.memory_batch_loss is False
    assert _parsed(["train", "--recipe", "omniglot-best"]).memory_batch_loss is True


def test_unknown_recipe_names_the_known_ones(capsys):
    assert cli.main(["train", "--recipe", "nope"]) == 2
    error = capsys.readouterr().err
    assert "--recipe 'nope'" in error and "omniglot-best" in error


def test_list_recipes_prints_every_recipe_with_its_measurement(capsys):
    assert cli.main(["train", "--list-recipes"]) == 0
    out = capsys.readouterr().out
    for name, recipe in recipes.RECIPES.items():
        assert name in out and recipe["measured"] in out
