// Being written (issue 4).
