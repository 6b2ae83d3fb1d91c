"""Analysis of finished runs, without TensorFlow: `results` reads run folders and groups their curves over
seeds, `report` builds the reproduction report's tables, `plotting` draws the curves and policy maps
(matplotlib, imported only with it)."""
