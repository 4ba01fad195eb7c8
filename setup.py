"""The one native module (streamdp.engine._order_scanner): built when a C compiler is present,
skipped with a warning otherwise; streamdp then reads every record on its Python path."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "streamdp.engine._order_scanner",
            ["streamdp/engine/_order_scanner.c"],
            optional=True,
            extra_compile_args=["-O2", "-std=c11"],
        )
    ]
)
