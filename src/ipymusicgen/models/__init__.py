"""The models layer: pydantic requests and records with every bound of the spec (`schema`), task states
(`tasks`), credit costs (`costs`), dollar prices (`dollar_prices`) and the engines' vocabulary (`providers`).
Imports only config and errors; callers import the module they mean (`from ipymusicgen.models import schema`)."""
