"""Dispatch's peers (BullMQ, arq, SAQ) for bench/compare.py: their drivers and the harness."""
