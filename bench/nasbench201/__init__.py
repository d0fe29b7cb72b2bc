"""NAS-Bench-201 against published trained accuracies (issue 16, part 1): the accuracy table."""
