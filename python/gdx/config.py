# SPDX-License-Identifier: MIT
"""gdx's knobs (docs/config.md): read and set them by name.

    gdx.config.get("file.chunk_size")       # "4194304", the value in force
    gdx.config.set("file.chunk_size", 8 << 20)
    gdx.config.set("file.chunk_size", None)  # back to environment, file, default
    gdx.config.knobs()                      # every knob: name, env, type, default, doc

A value set here wins over the environment and the JSON file, as
gdx_config_set() does; it is checked like the environment's would be.
"""
from . import _gdx


def get(name):
    """The knob's current value, as text."""
    return _gdx.config_get(name)


def set(name, value):  # noqa: A001  (the module's verb, as in gdx_config_set)
    """Sets a knob (a bool becomes "true"/"false", a number its decimal text);
    None unsets it."""
    if isinstance(value, bool):
        value = "true" if value else "false"
    elif value is not None:
        value = str(value)
    _gdx.config_set(name, value)


def load(path):
    """Loads a JSON knob file, replacing the values of any file loaded before."""
    _gdx.config_load(path)


def knobs():
    """Every knob as a dict: name, env, type, default, doc."""
    return _gdx.config_knobs()
