"""What is measured besides the loss: timing, energy, NVML, FLOPs, roofline, traces, device and provenance; imports data, models and the root, never run."""
