"""The dirty-tree gate (`gate.py`, `DirtyTreeGate`): a local folder's git tree must be clean
before a job may change it (docs/dirty-tree.md).

    gate.py    the gate: asks git, on a private git directory, whether the tree is clean
    layout.py  the folder's repository layout, read without trusting it
    shadow.py  the private git directory the check runs on
"""
