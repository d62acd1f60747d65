"""The reliability suite: faults injected into real runs, damaged and hostile inputs.

Each test acts as a user, a cluster or an attacker would — a signal to a rank, a
flipped byte, a crafted file, a second writer — and checks the exit status, that the
message names the file, field or rank, and that nothing outside the output changed.
"""
