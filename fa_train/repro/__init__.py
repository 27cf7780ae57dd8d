"""Recipes for every paper table and figure: load (recipe), run (runner), merge runs made
elsewhere (merge), report (report, with plots and metrics_csv), paper claims (claims), the
README and RESULTS tables (results), CLI (cli)."""
from fa_train.repro.recipe import Recipe, RecipeError, Run, list_recipe_paths, load_recipe

__all__ = ["Recipe", "RecipeError", "Run", "list_recipe_paths", "load_recipe"]
