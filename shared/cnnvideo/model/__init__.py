"""The model side: layer graphs, their cut points and the stages between cuts."""
