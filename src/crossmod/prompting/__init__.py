"""The prompting jobs' bodies (zero-shot, few-shot, MemeBridge) and what they share: chats, greedy
answers through Lightning's predict loop, exemplars and the pool they are drawn from, CLIP embeddings. No
training and no fine-tuned classifiers.
"""
