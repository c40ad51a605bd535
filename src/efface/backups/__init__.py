"""Backups with crypto-shredding: the file format, writing, restoring, and coverage."""

from .format import BackupResult, RestoreResult

__all__ = ["BackupResult", "RestoreResult"]
