"""Packaging glue that pyproject.toml cannot express on its own.

The repository keeps ``templates/`` and ``recipes/`` at the top level (users edit and read them there), but
the wheel must carry them, so they are mapped into the package as ``gputrain/templates`` and
``gputrain/recipes``. ``gputrain.resources`` finds them in both layouts.
"""

from setuptools import find_packages, setup

setup(
    packages=[*find_packages(include=["gputrain", "gputrain.*"]), "gputrain.templates", "gputrain.recipes"],
    package_dir={"gputrain.templates": "templates", "gputrain.recipes": "recipes"},
    package_data={
        "gputrain": ["py.typed", "data/*.yaml"],
        "gputrain.templates": ["*.j2"],
        "gputrain.recipes": ["*.yaml"],
    },
    include_package_data=False,
)
