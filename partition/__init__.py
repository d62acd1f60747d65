"""Partition stage: split a graph into K parts and write the partition directory."""
