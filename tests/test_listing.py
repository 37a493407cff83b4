"""`torchwm.listing`: what `list_backends`, `list_wrappers`, `list_sources` and `list_configs` say of
each name."""

from __future__ import annotations

from pathlib import Path

import torchwm
import torchwm.listing
import torchwm.plugins


def test_list_functions_name_plugin_distribution_and_version():
    backends = {b.name: b for b in torchwm.list_backends()}
    assert backends["sync"].plugin == "torchwm.vector.sync"
    assert backends["sync"].distribution == "torchwm"
    assert backends["sync"].version == torchwm.spec.package_versions()["torchwm"]
    wrappers = {w.name: w for w in torchwm.list_wrappers()}
    assert wrappers["frame_stack"].options == {"stack_size": 4, "padding": "zero"}
    assert {s.name for s in torchwm.list_sources()} >= {"gym", "ale"}


def test_configs_are_the_shipped_files_with_their_first_comment_line():
    configs = {config.name: config for config in torchwm.listing.list_configs()}
    shipped = Path(torchwm.__file__).parent / "configs"
    assert {config.path for config in configs.values()} == {
        path for path in shipped.iterdir() if path.suffix in (".toml", ".yaml", ".yml", ".json")
    }
    first_comment = next(
        line for line in configs["cartpole"].path.read_text().splitlines() if line.startswith("#")
    )
    assert configs["cartpole"].description == first_comment.lstrip("#").strip() != ""


def test_a_plugins_names_are_listed_with_its_declared_options_and_description(fresh_plugins):
    class Plugin:
        @torchwm.hookimpl
        def register_backends(self, register):
            register("probe", lambda spec, **options: None, options={"workers": 2}, description="a probe")

    torchwm.plugins.register_plugin(Plugin(), name="probe-plugin")
    (probe,) = [info for info in torchwm.list_backends() if info.name == "probe"]
    assert (probe.plugin, probe.options, probe.description) == ("probe-plugin", {"workers": 2}, "a probe")
