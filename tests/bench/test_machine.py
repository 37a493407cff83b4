"""`torchwm.bench.machine`: what a measurement ran on: the CPU as /proc/cpuinfo (or the platform) says it."""

from __future__ import annotations

from bench.cpuinfo import proc_cpuinfo
from torchwm import bench


def test_cpu_info_is_proc_cpuinfos():
    fields = proc_cpuinfo()
    cpu = bench.cpu_info()
    assert cpu["cpu_model"] == fields["model name"]
    assert cpu["cpu_family"] == fields["cpu family"] and cpu["cpu_model_number"] == fields["model"]
    flags = fields["flags"].split()
    assert cpu["cpu_flags"] == {"avx2": "avx2" in flags, "avx512vbmi": "avx512vbmi" in flags}


def test_cpu_info_reads_the_first_processor(tmp_path):
    path = tmp_path / "cpuinfo"
    path.write_text(
        "processor\t: 0\nmodel name\t: Some CPU\ncpu family\t: 25\nmodel\t\t: 1\n"
        "flags\t\t: fpu sse2 avx avx2 avx512f\n\n"
        "processor\t: 1\nmodel name\t: Other CPU\ncpu family\t: 26\nmodel\t\t: 2\nflags\t\t: avx512vbmi\n"
    )
    assert bench.cpu_info(path) == {
        "cpu_model": "Some CPU",
        "cpu_family": "25",
        "cpu_model_number": "1",
        "cpu_flags": {"avx2": True, "avx512vbmi": False},
    }


def test_cpu_info_without_proc_cpuinfo_asks_platform(tmp_path, monkeypatch):
    monkeypatch.setattr("platform.processor", lambda: "Intel64 Family 6 Model 158 Stepping 10, GenuineIntel")
    cpu = bench.cpu_info(tmp_path / "missing")
    assert (cpu["cpu_family"], cpu["cpu_model_number"]) == ("6", "158")
    assert cpu["cpu_model"] == "Intel64 Family 6 Model 158 Stepping 10, GenuineIntel"
    assert cpu["cpu_flags"] is None  # not known: never a guessed False
    info = {"machine": {"cores": 2, "usable_cores": 2, **cpu}, "atari_kernel": "NumPy and OpenCV (x)"}
    assert bench.describe_machine(info).splitlines() == [
        "machine: 2 cores, Intel64 Family 6 Model 158 Stepping 10, GenuineIntel (family 6, model 158)",
        "Atari kernel: NumPy and OpenCV (x)",
    ]
