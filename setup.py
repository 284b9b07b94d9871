"""Builds the optional C extension rmq._native (rmq/_native.c); everything else is in pyproject.toml.

`optional=True`: without a C compiler the install still succeeds and rmq runs its Python code.
"""
from setuptools import Extension, setup

setup(ext_modules=[Extension("rmq._native", ["rmq/_native.c"], depends=["rmq/_crc_vpclmul.h", "rmq/_native_produce.h", "rmq/_native_send.h", "rmq/_native_spark.h", "rmq/_native_fetch.h", "rmq/_native_writer.h"],
                             optional=True, extra_compile_args=["-O2", "-std=c11", "-Wall"])])
