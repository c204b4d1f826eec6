"""Stand-in: the forward-step module run_recipe.py loads by registry name (recipe_runner.py
STEP_FUNCTIONS: gpt_step / llm_step -> megatron.bridge.training.gpt_step.forward_step)."""


def forward_step(state, data_iterator, model, return_schedule_plan=False):
    raise NotImplementedError("the stand-in image trains nothing")
