"""Gymnasium 1.4.0's vector tests, ported to run on torchwm's backends (see README.md).

A package so that its helper modules (`gymnasium_suite.testing_env`, ...) have names of their own,
which worker processes import when they unpickle the envs a test defines.
"""
