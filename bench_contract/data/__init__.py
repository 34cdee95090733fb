"""Data readers (MNIST, CIFAR-10, image folders, text, graphs), synthetic data and the batch order; imports models and the root only."""
