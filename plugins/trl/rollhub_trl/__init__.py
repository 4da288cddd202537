"""rollhub-trl: TRL's GRPOTrainer trains on rollhub episodes."""

__version__ = "0.1.0"
