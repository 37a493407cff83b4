"""A PettingZoo env's whole state as bytes, and back: `env_bytes`, `env_from_bytes`.

``clone_state`` of a multi-agent env saves its PettingZoo env (wrappers, the raw env, its physics and
RNG) as one picklable value. Plain pickling does not do it: PettingZoo's envs are Gymnasium
``EzPickle`` objects, whose pickle holds only the constructor's arguments (a copy is a new, unreset env),
and pygame's ``Surface`` (pistonball's screen and sprites) does not pickle at all. The pickler here
saves an ``EzPickle`` object's attributes instead of its arguments a ``Surface`` with its pixels and a
``pygame.freetype.Font`` (MPE's) by its file and size;
everything else pickles as cloudpickle pickles it (so SuperSuit's local functions travel too). An env
holding something neither can pickle (a display window, an open file, a C object without pickle
support) raises `TypeError` naming it, and so does an env simulated by pymunk (pistonball): pymunk
pickles a ``Space`` without Chipmunk's contact cache, so a copy would not step as the original does.
"""

from __future__ import annotations

import io
from typing import Any

import cloudpickle
from gymnasium.utils import EzPickle

# Why an env simulated by pymunk (pistonball) is refused rather than copied close to exact.
UNSAVED_PHYSICS = (
    "its physics is a pymunk Space, whose pickle leaves out Chipmunk's contact cache (the impulses it "
    "carries from step to step), so a restored copy drifts from the original from its first step "
    "(pistonball's ball by a fraction of a pixel, its rewards in the last digits): a restore would not "
    "give the same arrays again"
)


def env_bytes(env: Any) -> bytes:
    """``env`` (any object graph) pickled whole: ``EzPickle`` objects by their attributes."""
    buffer = io.BytesIO()
    try:
        _StatePickler(buffer).dump(env)
    except Exception as exc:
        raise TypeError(
            f"cannot save the state of PettingZoo env {type(env).__name__}: {exc} (clone_state copies the "
            f"env whole, by pickling it)"
        ) from exc
    return buffer.getvalue()


def env_from_bytes(blob: bytes) -> Any:
    """A new env, the one `env_bytes` saved: it shares nothing with any other copy."""
    return cloudpickle.loads(blob)


class _StatePickler(cloudpickle.Pickler):
    def reducer_override(self, obj: Any) -> Any:
        cls = type(obj)
        if isinstance(obj, EzPickle) and not isinstance(obj, type):
            # (callable, args, state, listitems, dictitems, state_setter): EzPickle's own __setstate__
            # would build a new env from the constructor's arguments.
            return (_blank, (cls,), dict(vars(obj)), None, None, _set_attributes)
        # Cython's function type answers a descriptor here, not a string (numpy's, on Python 3.10).
        module = cls.__module__ if isinstance(cls.__module__, str) else ""
        if module.startswith("pygame") and cls.__name__ == "Surface":
            return _reduce_surface(obj)
        if module == "pygame.freetype" and cls.__name__ == "Font":
            # A font holds no state of the env's: the same file at the same size (MPE's renderer's).
            return (_font, (obj.path, obj.size))
        if module.startswith("pymunk") and cls.__name__ == "Space":
            raise TypeError(UNSAVED_PHYSICS)
        return super().reducer_override(obj)


def _blank(cls: Any) -> Any:
    return cls.__new__(cls)


def _set_attributes(obj: Any, state: dict[str, Any]) -> None:
    obj.__dict__.update(state)


def _font(path: str, size: Any) -> Any:
    import pygame.freetype

    pygame.freetype.init()
    return pygame.freetype.Font(path, size)


def _reduce_surface(surface: Any) -> tuple[Any, tuple[Any, ...]]:
    """A pygame ``Surface`` as its size, format, alpha, colour key and raw pixels."""
    return (
        _surface,
        (
            surface.get_size(),
            surface.get_flags(),
            surface.get_bitsize(),
            surface.get_masks(),
            surface.get_alpha(),
            surface.get_colorkey(),
            surface.get_buffer().raw,
        ),
    )


def _surface(
    size: tuple[int, int],
    flags: int,
    depth: int,
    masks: tuple[int, ...],
    alpha: int | None,
    colorkey: Any,
    pixels: bytes,
) -> Any:
    import pygame

    surface = pygame.Surface(size, flags, depth, masks)
    surface.get_buffer().write(pixels, 0)
    if alpha is not None:
        surface.set_alpha(alpha)
    if colorkey is not None:
        surface.set_colorkey(colorkey)
    return surface
