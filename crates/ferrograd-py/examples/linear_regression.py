"""Seed 001's linear regression, as the seed writes it; only the import differs
(``import ferrograd.graph as sf`` for ``import simpleflow as sf``) and the plot is saved to
a file instead of shown.

    python crates/ferrograd-py/examples/linear_regression.py [--plot out.png]
"""

import argparse

import numpy as np

import ferrograd.graph as sf

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--plot", help="save the points and the fitted line here (needs matplotlib)")
parser.add_argument("--seed", type=int, default=0)
args = parser.parse_args()
np.random.seed(args.seed)

input_x = np.linspace(-1, 1, 100)
input_y = input_x * 3 + np.random.randn(input_x.shape[0]) * 0.5

# Placeholder for training data
x = sf.placeholder()
y_ = sf.placeholder()
# 權重參數, 因為還未實現隨機初始, 目前使用1.0來初始化
w = sf.Variable([[1.0]], name="weight")
# 閾值
b = sf.Variable(0.0, name="threshold")
# 模型預測值
y = x * w + b

loss = sf.reduct_sum(sf.square(y - y_))

train_op = sf.GradientDescentOptimizer(learning_rate=0.005).minimize(loss)
# 訓練
feed_dict = {x: input_x, y_: input_y}
with sf.Session() as sess:
    for step in range(20):
        loss_value = sess.run(loss, feed_dict=feed_dict)
        mse = loss_value / len(input_x)
        # 優化一步
        print("step: {}, loss: {}, mse: {}".format(step, loss_value, mse))
        sess.run(train_op, feed_dict)
    # 訓練後的參數值
    w_value = sess.run(w, feed_dict=feed_dict)
    b_value = sess.run(b, feed_dict=feed_dict)
    print("w: {}, b: {}".format(w_value, b_value))

if args.plot:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    w_value = float(w_value.item())
    max_x, min_x = np.max(input_x), np.min(input_x)
    max_y, min_y = w_value * max_x + b_value, w_value * min_x + b_value
    plt.plot([max_x, min_x], [max_y, min_y], color="r")
    plt.scatter(input_x, input_y)
    plt.savefig(args.plot)
