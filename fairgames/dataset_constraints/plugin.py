"""What paper 001's family adds to a run (imported by :mod:`fairgames.families`)."""
