"""Tidy tables, memory reconciliation and plots from run folders."""
