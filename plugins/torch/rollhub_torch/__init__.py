"""rollhub-torch: the embedded in-process PyTorch trainer."""

__version__ = "0.1.0"
