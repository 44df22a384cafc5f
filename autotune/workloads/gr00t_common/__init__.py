"""What the GR00T replicas (N1.6, N1.7) share: the flow-matching action head (DiT, projectors),
their building blocks, the batch layout and the LeRobot data path."""
