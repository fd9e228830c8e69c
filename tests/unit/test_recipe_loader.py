"""Recipe loading: positions in errors, unknown-key hints, overrides typed by field, extends."""

from __future__ import annotations

from pathlib import Path

import pytest

from gputrain.errors import RecipeError
from gputrain.recipe.loader import load_recipe
from tests.conftest import DATA, RECIPES

R = DATA / "recipes"


@pytest.mark.parametrize("recipe", sorted(RECIPES.glob("*.yaml")), ids=lambda p: p.stem)
def test_every_bundled_recipe_validates(recipe: Path) -> None:
    loaded, _ = load_recipe(recipe)
    assert loaded.name == recipe.stem
    assert "cpu" in loaded.profiles, "every recipe needs a cpu profile for the CPU tests"
    first_line = recipe.read_text().splitlines()[0]
    assert first_line.startswith("# gputrain "), "header comment gives the command that runs the recipe"


@pytest.mark.parametrize(
    ("name", "line", "fragment"),
    [
        ("bad_type.yaml", 6, "train.batch_size"),
        ("unknown_key.yaml", 9, "did you mean 'train.warmup_steps'"),
        ("missing.yaml", 5, "missing required field 'train.batch_size'"),
        ("negative_gpus.yaml", 10, "resources.gpus"),
        ("bad_yaml.yaml", 4, "invalid YAML"),
    ],
)
def test_errors_name_file_line_and_field(name: str, line: int, fragment: str) -> None:
    with pytest.raises(RecipeError) as info:
        load_recipe(R / name)
    message = info.value.message
    assert message.startswith(f"{R / name}:{line}:"), message
    assert fragment in message
    assert "\n" not in message
    assert info.value.exit_code == 2


def test_extends_merges_and_keeps_positions_of_each_file() -> None:
    recipe, source = load_recipe(R / "child.yaml")
    assert recipe.name == "child_recipe"
    assert recipe.train.max_steps == 7
    assert recipe.train.batch_size == 8  # from base.yaml
    assert source.where(("train", "batch_size")).startswith(str(R / "base.yaml"))
    assert source.where(("train", "max_steps")).startswith(str(R / "child.yaml"))


def test_set_overrides_are_typed_by_field() -> None:
    recipe, _ = load_recipe(R / "base.yaml", ["train.batch_size=192", "model.name=12345", "train.compile=true"])
    assert recipe.train.batch_size == 192
    assert recipe.model.name == "12345"  # a string field keeps the text, not the int
    assert recipe.train.compile is True


def test_set_with_unknown_key_points_at_the_flag() -> None:
    with pytest.raises(RecipeError, match=r"^--set train.bach_size=3: unknown key 'train.bach_size'; "
                                          r"did you mean 'train.batch_size'\?$"):
        load_recipe(R / "base.yaml", ["train.bach_size=3"])


def test_set_with_bad_value_is_an_error() -> None:
    with pytest.raises(RecipeError, match="train.batch_size"):
        load_recipe(R / "base.yaml", ["train.batch_size=abc"])


def test_malformed_set_syntax() -> None:
    with pytest.raises(RecipeError, match="expected a.b.c=value"):
        load_recipe(R / "base.yaml", ["train.batch_size"])


def test_duplicate_keys_are_rejected(tmp_path: Path) -> None:
    path = tmp_path / "dup.yaml"
    path.write_text("name: a\nname: b\n")
    with pytest.raises(RecipeError, match=r"dup.yaml:2:1: duplicate key 'name'"):
        load_recipe(path)


def test_extends_loop_is_reported(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text("extends: b.yaml\n")
    (tmp_path / "b.yaml").write_text("extends: a.yaml\n")
    with pytest.raises(RecipeError, match="extends loop"):
        load_recipe(tmp_path / "a.yaml")


def test_secret_values_cannot_hide_in_env(tmp_path: Path) -> None:
    text = (R / "base.yaml").read_text().replace("resources:", "env:\n  WANDB_API_KEY: abc\nresources:")
    path = tmp_path / "secret.yaml"
    path.write_text(text)
    with pytest.raises(RecipeError, match="looks like a secret"):
        load_recipe(path)


def test_algorithm_section_is_checked_by_the_entrypoint_model(tmp_path: Path) -> None:
    text = (R / "base.yaml").read_text() + "algorithm:\n  iterashuns: 3\n"
    path = tmp_path / "algo.yaml"
    path.write_text(text)
    with pytest.raises(RecipeError, match=r"unknown key 'algorithm.iterashuns'; did you mean 'algorithm.iterations'"):
        load_recipe(path)


@pytest.mark.parametrize(
    ("text", "where", "fragment"),
    [
        ("name: 2024-13-45\n", "1:7", "month must be in 1..12"),  # a YAML date that is no date
        ("name: a\nentrypoint: !!int abc\n", "2:13", "invalid YAML value 'abc'"),
        ("name: !!python/object:os.system x\n", "1:7", "could not determine a constructor"),
        ("a: &x [*x]\n", "1:", "recursive YAML alias"),
        ("extends: nothere.yaml\nname: a\n", "1:1", "recipe file not found"),
    ],
)
def test_malformed_yaml_values_are_one_line_errors(tmp_path: Path, text: str, where: str, fragment: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(RecipeError) as info:
        load_recipe(path)
    message = info.value.message
    assert message.startswith(f"{path}:{where}"), message
    assert fragment in message and "\n" not in message


def test_unknown_key_is_named_before_the_field_it_misspells(tmp_path: Path) -> None:
    text = (R / "base.yaml").read_text().replace("batch_size:", "batch_sise:")
    path = tmp_path / "typo.yaml"
    path.write_text(text)
    with pytest.raises(RecipeError, match=r"unknown key 'train.batch_sise'; did you mean 'train.batch_size'"):
        load_recipe(path)


def test_set_with_an_impossible_date_is_an_error() -> None:
    with pytest.raises(RecipeError, match="train.max_steps"):
        load_recipe(R / "base.yaml", ["train.max_steps=2024-13-45"])


def test_infinite_numbers_are_rejected() -> None:
    with pytest.raises(RecipeError, match="train.learning_rate"):
        load_recipe(R / "base.yaml", ["train.learning_rate=.inf"])
