"""The models layer: pydantic requests and records with every bound of the spec (`schema`), task states
(`tasks`) and credit costs (`costs`). Imports only config and errors."""

from .schema import *  # noqa: F403  (the old `ipymusicgen.models` module's names)
