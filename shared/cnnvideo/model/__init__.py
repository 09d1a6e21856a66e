"""The model: the zoo of torchvision models, its layer graph and cut points, and the engines that run a stage."""
