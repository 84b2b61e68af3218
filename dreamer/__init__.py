"""Everything that learns: world model, actor-critic, learner, replay, the training loop."""
