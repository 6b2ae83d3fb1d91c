"""Analysis of finished runs, without TensorFlow: `results` reads run folders and groups their curves over
seeds, `report` builds the reproduction report's tables, `robust` the rliable-style statistics (IQM,
stratified bootstrap intervals, probability of improvement, performance profiles), `plotting` draws the
curves, profiles and policy maps (matplotlib, imported only with it)."""
