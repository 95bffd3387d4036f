"""The TTS stage: sentences, Piper, and the speaker that plays, holds and stops them."""
