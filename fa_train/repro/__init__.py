"""Recipes for every paper table and figure: load (recipe), run (runner), report (report), CLI."""
from fa_train.repro.recipe import Recipe, RecipeError, Run, list_recipe_paths, load_recipe

__all__ = ["Recipe", "RecipeError", "Run", "list_recipe_paths", "load_recipe"]
