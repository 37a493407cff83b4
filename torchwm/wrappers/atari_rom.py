"""An ALE `AtariEnv` that loads its ROM once: at its first reset, not also at construction.

ALE seeds its emulator's generator when it loads a ROM, so ``AtariEnv.reset(seed=...)`` loads the ROM
again, and an env built and then reset with a seed (every vector env's first reset) loads it twice. A
load costs about 90 ms, most of it ALE building its colour-averaging palette, so a worker that builds
and resets 8 Pong envs spent 0.7 s on loads the first reset threw away. `RomOnceAtariEnv` answers what
its constructor asks of the ROM (the action sets, the screen and RAM sizes) from an env of the same game
built earlier in this process, and loads its ROM at its first reset, with the seed that reset gives or
the one its constructor drew, so that it starts the very emulator an `AtariEnv` would. A call that needs
the emulator before that reset (render, clone/restore, step, ``load_rom``) loads it first.

The fused Atari env (`torchwm.wrappers.atari_fused`) builds its emulator with `make_atari_env`.
"""

from __future__ import annotations

from typing import Any, cast

from ale_py.env import AtariEnv

from torchwm.env_state import check_atari_state, restore_atari_env, save_atari_env

# What AtariEnv.__init__ reads from a loaded ROM, by (game, mode, difficulty), learned from the first
# env of each game this process builds.
_ROM_FACTS: dict[tuple[Any, ...], dict[str, Any]] = {}
_FACT_CALLS = ("getMinimalActionSet", "getLegalActionSet", "getScreenDims", "getRAMSize")


def make_atari_env(**kwargs: Any) -> AtariEnv:
    """``AtariEnv(**kwargs)``, whose ROM is loaded at its first reset when this process built that game
    before.

    Example:
        >>> first, second = make_atari_env(game="pong", frameskip=1), make_atari_env(game="pong", frameskip=1)
        >>> first.rom_pending, second.rom_pending
        (False, True)
        >>> second.action_space == first.action_space
        True
        >>> obs, info = second.reset(seed=3)
        >>> second.rom_pending, info["seeds"] == first.reset(seed=3)[1]["seeds"]
        (False, True)
    """
    return RomOnceAtariEnv(**kwargs)


class _RomFactsALE:
    """Stands for the env's unloaded ALE while `AtariEnv.__init__` reads the ROM's facts; a call it does
    not know (a newer ALE's constructor) loads the ROM and goes to the real ALE."""

    def __init__(self, env: RomOnceAtariEnv, ale: Any, facts: dict[str, Any]) -> None:
        self._env = env
        self._ale = ale
        self._facts = facts

    def __getattr__(self, name: str) -> Any:
        if name in self._facts:
            value = self._facts[name]
            return lambda: list(value) if isinstance(value, list) else value
        self._env.load_rom()
        return getattr(self._ale, name)


class RomOnceAtariEnv(AtariEnv):
    """`ale_py.env.AtariEnv`, its ROM loaded once (see the module's docstring).

    Attributes:
        rom_pending: True until the ROM is loaded.
    """

    def __init__(self, **kwargs: Any) -> None:
        self.rom_pending = False
        self._constructing = True
        super().__init__(**kwargs)
        self._constructing = False
        if isinstance(self.ale, _RomFactsALE):
            self.ale = self.ale._ale
        else:
            key = (self._game, self._game_mode, self._game_difficulty)
            _ROM_FACTS.setdefault(key, {call: getattr(self.ale, call)() for call in _FACT_CALLS})

    def load_game(self) -> None:
        facts = _ROM_FACTS.get((self._game, self._game_mode, self._game_difficulty))
        if self._constructing and facts is not None:
            # The constructor goes on reading facts; the ROM is loaded at the first reset.
            self.rom_pending = True
            self.ale = cast(Any, _RomFactsALE(self, self.ale, facts))
            return
        self.rom_pending = False
        super().load_game()

    def load_rom(self) -> None:
        """Load the ROM now if it is still pending, with the seed the constructor drew."""
        if self.rom_pending:
            ale = self.ale
            if isinstance(ale, _RomFactsALE):  # called from inside the constructor
                self.ale = ale._ale
            AtariEnv.load_game(self)
            self.rom_pending = False

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        if seed is None:
            self.load_rom()
        else:
            self.rom_pending = False  # AtariEnv.reset seeds the emulator and loads the ROM
        return super().reset(seed=seed, options=options)

    def step(self, action: Any) -> Any:
        self.load_rom()
        return super().step(action)

    def render(self) -> Any:
        self.load_rom()
        return super().render()

    def clone_state(self, include_rng: bool = False) -> Any:
        self.load_rom()
        return super().clone_state(include_rng=include_rng)

    def restore_state(self, state: Any) -> None:
        self.load_rom()
        super().restore_state(state)

    # Its state for clone_state (torchwm.plugin_api.StatefulLayer): an AtariEnv's, its ROM loaded first (a
    # state is saved or restored into the emulator the ROM starts).
    def get_torchwm_state(self) -> dict[str, Any]:
        self.load_rom()
        return save_atari_env(self)

    def set_torchwm_state(self, state: dict[str, Any]) -> None:
        self.load_rom()
        restore_atari_env(self, state)

    @staticmethod
    def check_torchwm_state(state: Any) -> None:
        check_atari_state("RomOnceAtariEnv", state)
