"""The ASR stage: voice activity, segmentation, whisper and the end of the user's turn."""
