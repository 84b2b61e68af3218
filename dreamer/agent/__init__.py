"""The DreamerV3 agent: networks (model.py), actors (actors.py), imagination, the acting policy, the
optimizer and the learner step; built from config values, imports no run code."""
